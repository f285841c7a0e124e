policy "p" {
  algorithm = "fixed-window"
  limit     = 1500000000000000
  window    = "1ms"
}
