route "orders" {
  path              = "/orders"
  upstream          = "http://127.0.0.1:9000"
  case_insensitive  = true
  ignore_extensions = ["json", ".tar.gz", ".json", ".JSON", "."]
}
