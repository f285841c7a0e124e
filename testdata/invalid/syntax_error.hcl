route "r" {
  path = "/a"
  upstream = "http://127.0.0.1:9000"
