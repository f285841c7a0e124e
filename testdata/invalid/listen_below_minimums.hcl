listen {
  http                = "8080"
  admin               = "localhost:admin"
  read_header_timeout = "0s"
  idle_timeout        = "500us"
  max_header_bytes    = 512
}
