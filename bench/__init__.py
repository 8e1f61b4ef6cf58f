"""bench: start servers, drive load generators against them, report what each layer costs."""
