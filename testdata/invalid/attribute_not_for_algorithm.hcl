policy "bucket" {
  algorithm     = "token-bucket"
  capacity      = 10
  refill_tokens = 1
  refill_period = "1s"
  window        = "1m"
}
