policy "per-second" {
  algorithm = "fixed-window"
  limit     = 10
  window    = "1s"
}

route "r" {
  path     = "/"
  upstream = "http://127.0.0.1:9000"
  policies = ["per-second", "per-dya"]
}
