"""The base of the errors that mean "this input is unusable", as opposed to a fault in the code."""


class InputError(ValueError):
    """A named input (file, directory, table) cannot be used; the message names it and says why.

    The `meddevkg` command prints such an error as one line and exits with 1; any other exception
    keeps its traceback."""
