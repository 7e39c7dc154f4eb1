"""The generators behind bench/tables, one file per benchmark script."""
