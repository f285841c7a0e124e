route "orders.read" {
  path           = "/api/v1/orders"
  upstream       = "http://127.0.0.1:9000"
  rewrite_prefix = "cgi-bin/orders"
}

route "orders.write" {
  path           = "/api/v1/orders/new"
  upstream       = "http://127.0.0.1:9000"
  rewrite_prefix = "/cgi-bin/orders?action=new"
}

route "orders.legacy" {
  path           = "/api/v0/orders"
  upstream       = "http://127.0.0.1:9000"
  rewrite_prefix = "/cgi-bin/%2Forders"
  host_header    = "orders.internal/x"
}
