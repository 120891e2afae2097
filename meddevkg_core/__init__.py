"""MedDevKG core: the pure logic of linking PMA devices to patents (never imports dagster)."""

__version__ = "0.1.0"
