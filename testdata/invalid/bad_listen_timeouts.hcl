listen {
  http                = ":8080"
  tunnel_idle_timeout = "0s"
  body_read_timeout   = "-5s"
}
