policy "p" {
  algorithm = "fixed-window"
  window    = "1m"
}

route "r" {
  path = "/"
}
