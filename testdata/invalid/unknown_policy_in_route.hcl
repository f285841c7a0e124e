route "r" {
  path     = "/"
  upstream = "http://127.0.0.1:9000"
  policy   = "per-clinet"
}
