policy "free-orders" {
  algorithm = "fixed-window"
  limit     = 2
  window    = "1m"
}

policy "gold-orders" {
  algorithm = "fixed-window"
  limit     = 5
  window    = "1m"
}

route "orders.read" {
  path     = "/api/v1/orders"
  upstream = "http://127.0.0.1:9000"
  policy   = "free-orders"
  plans    = { gold = "gold-ordres", partner = ["gold-orders", "partner-day"] }
}
