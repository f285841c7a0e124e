upstream "legacy-orders" {
  targets = ["http://deploy:s3cret@10.0.0.11:9000"]
}

route "orders.read" {
  path     = "/orders"
  upstream = "legacy-orders"
}
