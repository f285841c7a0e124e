policy "short" {
  algorithm = "fixed-window"
  limit     = 5
  window    = "1m"
  penalty   = "500ms"
}
policy "watching" {
  algorithm = "fixed-window"
  limit     = 5
  window    = "1m"
  mode      = "shadow"
  penalty   = "10m"
}
