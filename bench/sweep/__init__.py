"""Running a tune plan: one worker process per backend, lanes per GPU, rows appended as they arrive."""
