subject {
  trusted_proxies = ["10.0.0.0/8", "10.0.0.1/8", "192.168.1.0/33", "not-an-ip"]
}
