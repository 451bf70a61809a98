"""a2amesh benchmarks (not tests): scripts that print a table and write JSON results; see README.md."""
