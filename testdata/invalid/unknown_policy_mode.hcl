policy "trial" {
  algorithm = "fixed-window"
  limit     = 10
  window    = "1s"
  mode      = "dry-run"
}
