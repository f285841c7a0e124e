route "trailing.dot" {
  path     = "/v1./orders"
  upstream = "http://127.0.0.1:9000"
}
