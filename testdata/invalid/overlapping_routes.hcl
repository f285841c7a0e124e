route "a" {
  host     = "api.example.com"
  path     = "/orders"
  methods  = ["GET", "POST"]
  upstream = "http://127.0.0.1:9000"
}

route "b" {
  host     = "api.example.com"
  path     = "/orders/"
  methods  = ["POST"]
  upstream = "http://127.0.0.1:9001"
}
