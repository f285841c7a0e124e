upstream "legacy" {
  targets = ["http://10.0.0.5:8080"]
  overload {
    min_limit     = 2
    max_in_flight = 8
    queue         = 0
  }
}

route "checkout" {
  path     = "/checkout"
  upstream = "legacy"
}
