"""flowcore on Temporal: a generic workflow runs the pure interpreter."""
