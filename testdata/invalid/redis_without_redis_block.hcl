limiter {
  backend = "redis"
}
