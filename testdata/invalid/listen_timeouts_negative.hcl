listen {
  http                = "127.0.0.1:8080"
  read_header_timeout = "-1s"
  idle_timeout        = "0s"
  max_header_bytes    = 0
}
