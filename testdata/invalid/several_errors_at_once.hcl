listen {
  http = "8080"
}

policy "p" {
  algorithm = "fixed-window"
  limit     = 0
  window    = "1m"
}

route "r" {
  path     = "/a"
  methods  = ["GET", "G E T"]
  upstream = "http://127.0.0.1:9000"
  subject  = ["client_ip", "cookie"]
  policy   = "p"
}
