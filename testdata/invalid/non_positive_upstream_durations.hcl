upstream "legacy-orders" {
  targets          = ["http://10.0.0.11:9000", "http://10.0.0.12:9000"]
  connect_timeout  = "0s"
  response_timeout = "-30s"
  max_fails        = -1
  fail_timeout     = "0"
  health {
    path     = "/healthz"
    interval = "-5s"
  }
}

route "orders.read" {
  path     = "/orders"
  upstream = "legacy-orders"
}
