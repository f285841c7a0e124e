upstream "legacy" {
  targets          = ["http://10.0.0.11:9000"]
  connect_timeout  = "0s"
  response_timeout = "500us"
  fail_timeout     = "-1s"
}

route "r" {
  path     = "/"
  upstream = "legacy"
}
