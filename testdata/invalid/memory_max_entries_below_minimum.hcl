limiter {
  backend = "memory"
  memory {
    max_entries = 0
  }
}
