route "orders.read" {
  path     = "/orders"
  upstream = "http://127.0.0.1:9000"
  subject  = ["header:", "cookie:bad name", "query:a=b", "form:x", "header:X-Tenant", "header:x-tenant", "client_ip"]
}
