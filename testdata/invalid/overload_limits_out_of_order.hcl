upstream "legacy" {
  targets          = ["http://10.0.0.5:8080"]
  response_timeout = "2s"
  overload {
    adaptive      = true
    min_limit     = 16
    max_in_flight = 8
    queue_timeout = "5s"
  }
}

route "checkout" {
  path     = "/checkout"
  upstream = "legacy"
}
