_ipmasq() {
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
                cmd="ipmasq"
                ;;
            ipmasq,agent)
                cmd="ipmasq__subcmd__agent"
                ;;
            ipmasq,cleanup)
                cmd="ipmasq__subcmd__cleanup"
                ;;
            ipmasq,explain)
                cmd="ipmasq__subcmd__explain"
                ;;
            ipmasq,fleet)
                cmd="ipmasq__subcmd__fleet"
                ;;
            ipmasq,help)
                cmd="ipmasq__subcmd__help"
                ;;
            ipmasq,show)
                cmd="ipmasq__subcmd__show"
                ;;
            ipmasq,validate)
                cmd="ipmasq__subcmd__validate"
                ;;
            ipmasq,who)
                cmd="ipmasq__subcmd__who"
                ;;
            ipmasq__subcmd__fleet,help)
                cmd="ipmasq__subcmd__fleet__subcmd__help"
                ;;
            ipmasq__subcmd__fleet,rollout)
                cmd="ipmasq__subcmd__fleet__subcmd__rollout"
                ;;
            ipmasq__subcmd__fleet__subcmd__help,help)
                cmd="ipmasq__subcmd__fleet__subcmd__help__subcmd__help"
                ;;
            ipmasq__subcmd__fleet__subcmd__help,rollout)
                cmd="ipmasq__subcmd__fleet__subcmd__help__subcmd__rollout"
                ;;
            ipmasq__subcmd__fleet__subcmd__help__subcmd__rollout,abort)
                cmd="ipmasq__subcmd__fleet__subcmd__help__subcmd__rollout__subcmd__abort"
                ;;
            ipmasq__subcmd__fleet__subcmd__help__subcmd__rollout,promote)
                cmd="ipmasq__subcmd__fleet__subcmd__help__subcmd__rollout__subcmd__promote"
                ;;
            ipmasq__subcmd__fleet__subcmd__help__subcmd__rollout,resume)
                cmd="ipmasq__subcmd__fleet__subcmd__help__subcmd__rollout__subcmd__resume"
                ;;
            ipmasq__subcmd__fleet__subcmd__help__subcmd__rollout,start)
                cmd="ipmasq__subcmd__fleet__subcmd__help__subcmd__rollout__subcmd__start"
                ;;
            ipmasq__subcmd__fleet__subcmd__help__subcmd__rollout,status)
                cmd="ipmasq__subcmd__fleet__subcmd__help__subcmd__rollout__subcmd__status"
                ;;
            ipmasq__subcmd__fleet__subcmd__rollout,abort)
                cmd="ipmasq__subcmd__fleet__subcmd__rollout__subcmd__abort"
                ;;
            ipmasq__subcmd__fleet__subcmd__rollout,help)
                cmd="ipmasq__subcmd__fleet__subcmd__rollout__subcmd__help"
                ;;
            ipmasq__subcmd__fleet__subcmd__rollout,promote)
                cmd="ipmasq__subcmd__fleet__subcmd__rollout__subcmd__promote"
                ;;
            ipmasq__subcmd__fleet__subcmd__rollout,resume)
                cmd="ipmasq__subcmd__fleet__subcmd__rollout__subcmd__resume"
                ;;
            ipmasq__subcmd__fleet__subcmd__rollout,start)
                cmd="ipmasq__subcmd__fleet__subcmd__rollout__subcmd__start"
                ;;
            ipmasq__subcmd__fleet__subcmd__rollout,status)
                cmd="ipmasq__subcmd__fleet__subcmd__rollout__subcmd__status"
                ;;
            ipmasq__subcmd__fleet__subcmd__rollout__subcmd__help,abort)
                cmd="ipmasq__subcmd__fleet__subcmd__rollout__subcmd__help__subcmd__abort"
                ;;
            ipmasq__subcmd__fleet__subcmd__rollout__subcmd__help,help)
                cmd="ipmasq__subcmd__fleet__subcmd__rollout__subcmd__help__subcmd__help"
                ;;
            ipmasq__subcmd__fleet__subcmd__rollout__subcmd__help,promote)
                cmd="ipmasq__subcmd__fleet__subcmd__rollout__subcmd__help__subcmd__promote"
                ;;
            ipmasq__subcmd__fleet__subcmd__rollout__subcmd__help,resume)
                cmd="ipmasq__subcmd__fleet__subcmd__rollout__subcmd__help__subcmd__resume"
                ;;
            ipmasq__subcmd__fleet__subcmd__rollout__subcmd__help,start)
                cmd="ipmasq__subcmd__fleet__subcmd__rollout__subcmd__help__subcmd__start"
                ;;
            ipmasq__subcmd__fleet__subcmd__rollout__subcmd__help,status)
                cmd="ipmasq__subcmd__fleet__subcmd__rollout__subcmd__help__subcmd__status"
                ;;
            ipmasq__subcmd__help,agent)
                cmd="ipmasq__subcmd__help__subcmd__agent"
                ;;
            ipmasq__subcmd__help,cleanup)
                cmd="ipmasq__subcmd__help__subcmd__cleanup"
                ;;
            ipmasq__subcmd__help,explain)
                cmd="ipmasq__subcmd__help__subcmd__explain"
                ;;
            ipmasq__subcmd__help,fleet)
                cmd="ipmasq__subcmd__help__subcmd__fleet"
                ;;
            ipmasq__subcmd__help,help)
                cmd="ipmasq__subcmd__help__subcmd__help"
                ;;
            ipmasq__subcmd__help,show)
                cmd="ipmasq__subcmd__help__subcmd__show"
                ;;
            ipmasq__subcmd__help,validate)
                cmd="ipmasq__subcmd__help__subcmd__validate"
                ;;
            ipmasq__subcmd__help,who)
                cmd="ipmasq__subcmd__help__subcmd__who"
                ;;
            ipmasq__subcmd__help__subcmd__fleet,rollout)
                cmd="ipmasq__subcmd__help__subcmd__fleet__subcmd__rollout"
                ;;
            ipmasq__subcmd__help__subcmd__fleet__subcmd__rollout,abort)
                cmd="ipmasq__subcmd__help__subcmd__fleet__subcmd__rollout__subcmd__abort"
                ;;
            ipmasq__subcmd__help__subcmd__fleet__subcmd__rollout,promote)
                cmd="ipmasq__subcmd__help__subcmd__fleet__subcmd__rollout__subcmd__promote"
                ;;
            ipmasq__subcmd__help__subcmd__fleet__subcmd__rollout,resume)
                cmd="ipmasq__subcmd__help__subcmd__fleet__subcmd__rollout__subcmd__resume"
                ;;
            ipmasq__subcmd__help__subcmd__fleet__subcmd__rollout,start)
                cmd="ipmasq__subcmd__help__subcmd__fleet__subcmd__rollout__subcmd__start"
                ;;
            ipmasq__subcmd__help__subcmd__fleet__subcmd__rollout,status)
                cmd="ipmasq__subcmd__help__subcmd__fleet__subcmd__rollout__subcmd__status"
                ;;
            *)
                ;;
        esac
    done

    case "${cmd}" in
        ipmasq)
            opts="-h -V --list --help --version agent fleet who show explain cleanup validate help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 1 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__agent)
            opts="-v -h -V --config --config-dir --config-writer-deadline --config-source --configmap --kubeconfig --node-name --node-status --node-taint --status-spread --api-view-stale-after --resync-interval --masq-chain --enable-ipv6 --nomasq-all-reserved-ranges --random-fully --to-ports --backend --iptables-mode --nftables-table-owner --once --offline --dry-run --conntrack-reset --cleanup-on-exit --logging-format --log-format --metrics-addr --snat-log --snat-log-max-size --snat-log-keep --snat-port-pressure --state-dir --last-known-good-dir --v --logtostderr --alsologtostderr --stderrthreshold --log-dir --log-file --log-file-max-size --vmodule --log-backtrace-at --skip-headers --add-dir-header --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
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
        ipmasq__subcmd__cleanup)
            opts="-o -h -V --masq-chain --all-variants --dry-run --state-dir --output --color --backend --iptables-mode --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --masq-chain)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --all-variants)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --state-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --output)
                    COMPREPLY=($(compgen -W "text json yaml" -- "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -W "text json yaml" -- "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
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
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__explain)
            opts="-o -h -V --from --out-interface --config --config-dir --no-live --state-dir --output --color --masq-chain --enable-ipv6 --nomasq-all-reserved-ranges --random-fully --to-ports --backend --iptables-mode --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --from)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --out-interface)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --state-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --output)
                    COMPREPLY=($(compgen -W "text json yaml" -- "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -W "text json yaml" -- "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
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
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__fleet)
            opts="-l -o -h -V --kubeconfig --selector --timeout --page-size --agent-pods --agent-namespace --agent-selector --output --color --help --version rollout help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --kubeconfig)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --selector)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -l)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --page-size)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --agent-pods)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --agent-namespace)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --agent-selector)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --output)
                    COMPREPLY=($(compgen -W "text json yaml" -- "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -W "text json yaml" -- "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__fleet__subcmd__help)
            opts="rollout help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__fleet__subcmd__help__subcmd__help)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__fleet__subcmd__help__subcmd__rollout)
            opts="start status promote abort resume"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__fleet__subcmd__help__subcmd__rollout__subcmd__abort)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 5 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__fleet__subcmd__help__subcmd__rollout__subcmd__promote)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 5 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__fleet__subcmd__help__subcmd__rollout__subcmd__resume)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 5 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__fleet__subcmd__help__subcmd__rollout__subcmd__start)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 5 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__fleet__subcmd__help__subcmd__rollout__subcmd__status)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 5 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__fleet__subcmd__rollout)
            opts="-o -h -V --kubeconfig --configmap --timeout --output --help --version start status promote abort resume help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --kubeconfig)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --configmap)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --output)
                    COMPREPLY=($(compgen -W "text json yaml" -- "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -W "text json yaml" -- "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__fleet__subcmd__rollout__subcmd__abort)
            opts="-o -h -V --kubeconfig --configmap --timeout --output --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --kubeconfig)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --configmap)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --output)
                    COMPREPLY=($(compgen -W "text json yaml" -- "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -W "text json yaml" -- "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__fleet__subcmd__rollout__subcmd__help)
            opts="start status promote abort resume help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__fleet__subcmd__rollout__subcmd__help__subcmd__abort)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 5 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__fleet__subcmd__rollout__subcmd__help__subcmd__help)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 5 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__fleet__subcmd__rollout__subcmd__help__subcmd__promote)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 5 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__fleet__subcmd__rollout__subcmd__help__subcmd__resume)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 5 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__fleet__subcmd__rollout__subcmd__help__subcmd__start)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 5 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__fleet__subcmd__rollout__subcmd__help__subcmd__status)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 5 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__fleet__subcmd__rollout__subcmd__promote)
            opts="-o -h -V --force --kubeconfig --configmap --timeout --output --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --kubeconfig)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --configmap)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --output)
                    COMPREPLY=($(compgen -W "text json yaml" -- "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -W "text json yaml" -- "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__fleet__subcmd__rollout__subcmd__resume)
            opts="-o -h -V --from-wave --kubeconfig --configmap --timeout --output --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --from-wave)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --kubeconfig)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --configmap)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --output)
                    COMPREPLY=($(compgen -W "text json yaml" -- "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -W "text json yaml" -- "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__fleet__subcmd__rollout__subcmd__start)
            opts="-o -h -V --waves --soak --start --node-selector --invariant --kubeconfig --configmap --timeout --output --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --waves)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --soak)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --start)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --node-selector)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --invariant)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --kubeconfig)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --configmap)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --output)
                    COMPREPLY=($(compgen -W "text json yaml" -- "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -W "text json yaml" -- "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__fleet__subcmd__rollout__subcmd__status)
            opts="-o -h -V --kubeconfig --configmap --timeout --output --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --kubeconfig)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --configmap)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --output)
                    COMPREPLY=($(compgen -W "text json yaml" -- "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -W "text json yaml" -- "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__help)
            opts="agent fleet who show explain cleanup validate help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__help__subcmd__agent)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__help__subcmd__cleanup)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__help__subcmd__explain)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__help__subcmd__fleet)
            opts="rollout"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__help__subcmd__fleet__subcmd__rollout)
            opts="start status promote abort resume"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__help__subcmd__fleet__subcmd__rollout__subcmd__abort)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 5 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__help__subcmd__fleet__subcmd__rollout__subcmd__promote)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 5 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__help__subcmd__fleet__subcmd__rollout__subcmd__resume)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 5 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__help__subcmd__fleet__subcmd__rollout__subcmd__start)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 5 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__help__subcmd__fleet__subcmd__rollout__subcmd__status)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 5 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__help__subcmd__help)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__help__subcmd__show)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__help__subcmd__validate)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__help__subcmd__who)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__show)
            opts="-o -h -V --config --output --wide --state-dir --color --masq-chain --enable-ipv6 --nomasq-all-reserved-ranges --random-fully --to-ports --backend --iptables-mode --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --output)
                    COMPREPLY=($(compgen -W "text json yaml" -- "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -W "text json yaml" -- "${cur}"))
                    return 0
                    ;;
                --state-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
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
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__validate)
            opts="-o -v -h -V --to-ports --strict --output --print-effective --verbose --merged --color --no-node-checks --node-labels --enable-ipv6 --nomasq-all-reserved-ranges --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --to-ports)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --output)
                    COMPREPLY=($(compgen -W "text json yaml" -- "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -W "text json yaml" -- "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --node-labels)
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
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ipmasq__subcmd__who)
            opts="-o -h -V --pod --at --since --until --tolerance --proto --log --output --color --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --pod)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --at)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --since)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --until)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --tolerance)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --proto)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --log)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --output)
                    COMPREPLY=($(compgen -W "text json yaml" -- "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -W "text json yaml" -- "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
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
    complete -F _ipmasq -o nosort -o bashdefault -o default ipmasq
else
    complete -F _ipmasq -o bashdefault -o default ipmasq
fi
