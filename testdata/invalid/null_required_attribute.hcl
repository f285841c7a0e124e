policy "p" {
  algorithm = null
  limit     = 5
  window    = "1m"
}

route "r" {
  path     = "/"
  upstream = "http://127.0.0.1:9000"
  policy   = "p"
}
