subject {
  api_keys_file = "api-keys-bad-plans.txt"
}
