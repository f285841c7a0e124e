policy "p" {
  algorithm = "leaky-bucket"
  limit     = 10
  window    = "1m"
}
