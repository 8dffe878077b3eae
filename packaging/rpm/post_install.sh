# The multi-call binary answers to ip-masq-agent as upstream's image does.
ln -sf ipmasq /usr/sbin/ip-masq-agent
ln -sf ipmasq-agent.8 /usr/share/man/man8/ip-masq-agent.8
if [ -d /run/systemd/system ]; then systemctl daemon-reload >/dev/null 2>&1 || :; fi
