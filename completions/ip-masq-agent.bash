_ip__masq__agent() {
    local i cur prev opts cmd
    COMPREPLY=()
    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
        cur="$2"
    else
        cur="${COMP_WORDS[COMP_CWORD]}"
    fi
    prev="$3"
    cmd=""
    opts=""

    for i in "${COMP_WORDS[@]:0:COMP_CWORD}"
    do
        case "${cmd},${i}" in
            ",$1")
                cmd="ip__masq__agent"
                ;;
            *)
                ;;
        esac
    done

    case "${cmd}" in
        ip__masq__agent)
            opts="-v -h -V --config --config-dir --config-writer-deadline --config-source --configmap --kubeconfig --node-name --node-status --node-taint --status-spread --api-view-stale-after --resync-interval --masq-chain --enable-ipv6 --nomasq-all-reserved-ranges --random-fully --to-ports --backend --iptables-mode --nftables-table-owner --once --offline --dry-run --conntrack-reset --cleanup-on-exit --logging-format --log-format --metrics-addr --snat-log --snat-log-max-size --snat-log-keep --snat-port-pressure --state-dir --last-known-good-dir --v --logtostderr --alsologtostderr --stderrthreshold --log-dir --log-file --log-file-max-size --vmodule --log-backtrace-at --skip-headers --add-dir-header --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 1 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config-writer-deadline)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config-source)
                    COMPREPLY=($(compgen -W "file api" -- "${cur}"))
                    return 0
                    ;;
                --configmap)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --kubeconfig)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --node-name)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --node-status)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --status-spread)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --api-view-stale-after)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --resync-interval)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --masq-chain)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --enable-ipv6)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nomasq-all-reserved-ranges)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --random-fully)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --to-ports)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --backend)
                    COMPREPLY=($(compgen -W "iptables nftables" -- "${cur}"))
                    return 0
                    ;;
                --iptables-mode)
                    COMPREPLY=($(compgen -W "auto nft legacy" -- "${cur}"))
                    return 0
                    ;;
                --nftables-table-owner)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --conntrack-reset)
                    COMPREPLY=($(compgen -W "off connectionless all" -- "${cur}"))
                    return 0
                    ;;
                --cleanup-on-exit)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                --logging-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                --metrics-addr)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --snat-log)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --snat-log-max-size)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --snat-log-keep)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --state-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --last-known-good-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --v)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -v)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --logtostderr)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --alsologtostderr)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --stderrthreshold)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --log-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --log-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --log-file-max-size)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --vmodule)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --log-backtrace-at)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --skip-headers)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --add-dir-header)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
    esac
}

if [[ "${BASH_VERSINFO[0]}" -eq 4 && "${BASH_VERSINFO[1]}" -ge 4 || "${BASH_VERSINFO[0]}" -gt 4 ]]; then
    complete -F _ip__masq__agent -o nosort -o bashdefault -o default ip-masq-agent
else
    complete -F _ip__masq__agent -o bashdefault -o default ip-masq-agent
fi
