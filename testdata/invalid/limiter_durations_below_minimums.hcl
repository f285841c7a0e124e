limiter {
  deadline            = "0s"
  failure_retry_after = "500ms"
}

listen {
  http                = ":8080"
  tunnel_idle_timeout = "500us"
  body_read_timeout   = "-1s"
}
