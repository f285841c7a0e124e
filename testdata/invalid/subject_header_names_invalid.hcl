subject {
  trusted_proxies  = ["10.0.0.0/8"]
  forwarded_header = "X Forwarded For"
  principal_header = ""
  api_key_header   = "X-API-Key:"
  plan_header      = "X-Plan\n"
}
