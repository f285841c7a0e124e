policy "free-orders" {
  algorithm = "fixed-window"
  limit     = 2
  window    = "1m"
}

route "orders.read" {
  path     = "/api/v1/orders"
  upstream = "http://127.0.0.1:9000"
  policy   = "free-orders"
  plans    = { gold = [], "bad plan" = "free-orders", silver = ["free-orders", "free-orders"] }
}

route "orders.write" {
  path     = "/api/v1/orders/new"
  upstream = "http://127.0.0.1:9000"
  policy   = "free-orders"
  plans    = "free-orders"
}
