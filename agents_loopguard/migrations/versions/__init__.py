"""The revisions, one file each: ``000N_*.py`` brings the store to schema version N."""
