route "orders.read" {
  path     = "/api/v1/orders"
  upstream = "http://127.0.0.1:9000"
  request_headers {
    set    = { "X_Forwarded_For" = "10.0.0.1", "X_Trace_Id" = "gw" }
    remove = ["X_API_Key"]
  }
}
