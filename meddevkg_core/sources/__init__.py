"""Network and bulk sources: API clients, bulk-file readers and record-to-table conversions."""
