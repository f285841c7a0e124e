policy "per-client" {
  algorithm = "fixed-window"
  limit     = 100
  window    = "1m"
}

upstream "legacy" {
  targets = ["http://10.0.0.5:8080"]
  overload {
    max_in_flight = 8
  }
}

route "checkout" {
  path          = "/checkout"
  upstream      = "legacy"
  policy        = "per-client"
  priority      = "urgent"
  plan_priority = { free = "low" }
}
