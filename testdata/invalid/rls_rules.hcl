listen {
  http               = "127.0.0.1:8080"
  ratelimit_grpc     = "127.0.0.1:8081"
  ratelimit_grpc_tls = true
}
policy "per-client" {
  algorithm = "fixed-window"
  limit     = 10
  window    = "1m"
}
policy "in-flight" {
  algorithm = "concurrency"
  limit     = 2
}
route "mail" {
  path     = "/mail"
  upstream = "http://127.0.0.1:9000"
  policy   = "per-client"
  subject  = ["client_ip"]
}
rls_rule "no-subject" {
  domain     = "edge"
  descriptor = ["action=send"]
  route      = "mail"
}
rls_rule "unknown-source" {
  domain     = "edge"
  descriptor = ["api_key", "action=send"]
  policies   = ["per-client"]
}
rls_rule "both" {
  domain     = "edge"
  descriptor = ["client_ip"]
  route      = "mail"
  policies   = ["per-client"]
}
rls_rule "no-end" {
  domain     = "edge"
  descriptor = ["client_ip", "kind=stream"]
  policies   = ["in-flight", "nope"]
}
rls_rule "bad-entry" {
  domain     = "edge"
  descriptor = ["client_ip", "=x"]
  route      = "nowhere"
}
