"""Asset modules, one per stage of the method, in pipeline order."""
