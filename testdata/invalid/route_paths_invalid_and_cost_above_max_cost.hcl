policy "small" {
  algorithm = "fixed-window"
  limit     = 10
  window    = "1m"
  max_cost  = 2
}

policy "large" {
  algorithm = "fixed-window"
  limit     = 100
  window    = "1m"
  max_cost  = 50
}

route "relative" {
  path     = "orders"
  upstream = "http://127.0.0.1:9000"
}

route "encoded-slash" {
  path     = "/a%2Fb"
  upstream = "http://127.0.0.1:9000"
}

route "parameters" {
  path     = "/a;b"
  upstream = "http://127.0.0.1:9000"
}

route "costly" {
  path     = "/costly"
  upstream = "http://127.0.0.1:9000"
  cost     = 5
  policies = ["large", "small"]
}

route "costly-plan" {
  path     = "/costly-plan"
  upstream = "http://127.0.0.1:9000"
  cost     = 3
  policy   = "large"
  plans    = { gold = "small" }
}
