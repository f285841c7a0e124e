policy "p" {
  algorithm = "fixed-window"
  limit     = 1.5
  window    = "1m"
}
