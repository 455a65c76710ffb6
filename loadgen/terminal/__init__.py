"""What the benchmark prints (pure): the result and report lines of a run, a series or a comparison."""
