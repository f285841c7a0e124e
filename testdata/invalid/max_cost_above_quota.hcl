policy "p" {
  algorithm = "fixed-window"
  limit     = 3
  window    = "1m"
  max_cost  = 5
}

route "r" {
  path     = "/"
  upstream = "http://127.0.0.1:9000"
  policy   = "p"
  cost     = 2
}
