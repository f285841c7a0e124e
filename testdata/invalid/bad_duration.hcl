limiter {
  deadline = "750"
}

policy "p" {
  algorithm = "fixed-window"
  limit     = 10
  window    = "a minute"
}
