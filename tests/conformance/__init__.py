"""The conformance kit: every door of every framework as a row, against the same invariants (see README.md)."""
