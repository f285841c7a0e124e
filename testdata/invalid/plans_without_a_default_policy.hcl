policy "gold-orders" {
  algorithm = "fixed-window"
  limit     = 100
  window    = "1m"
}

route "orders.read" {
  path     = "/api/v1/orders"
  upstream = "http://127.0.0.1:9000"
  plans    = { gold = "gold-orders" }
}
