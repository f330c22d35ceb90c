"""What every layer uses: errors, seeds, chained records and atomic writes, paths, run settings, timing, parallel jobs."""
