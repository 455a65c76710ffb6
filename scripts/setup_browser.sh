#!/usr/bin/env bash
# Installs what the real-browser UI tests need: Debian's Chromium, its driver and CJK fonts (so Chinese text
# renders as glyphs, not empty boxes). Idempotent: does nothing when /usr/bin/chromium and the font exist;
# runs `apt-get update` only when the package lists are missing or the install fails with them.
set -euo pipefail

PACKAGES=(chromium chromium-driver fonts-noto-cjk)
CJK_FONT_GLOB='/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.tt*'

have_font() {
    # shellcheck disable=SC2086
    ls $CJK_FONT_GLOB >/dev/null 2>&1 || fc-list 2>/dev/null | grep -qi 'Noto Sans CJK'
}

if [[ -x /usr/bin/chromium && -x /usr/bin/chromedriver ]] && have_font; then
    echo "[setup_browser] chromium, chromium-driver and fonts-noto-cjk already present"
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "[ERROR] apt-get not found: install ${PACKAGES[*]} with your system's package manager" >&2
    exit 2
fi

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO=(sudo)
    else
        echo "[ERROR] need root (or sudo) to install ${PACKAGES[*]}" >&2
        exit 2
    fi
fi

export DEBIAN_FRONTEND=noninteractive
install() {
    "${SUDO[@]}" apt-get install -y --no-install-recommends "${PACKAGES[@]}"
}

if compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null && install; then
    :
else
    echo "[setup_browser] refreshing package lists (apt-get update)"
    "${SUDO[@]}" apt-get update
    install
fi

command -v fc-cache >/dev/null 2>&1 && fc-cache -f >/dev/null 2>&1 || true
/usr/bin/chromium --version
echo "[setup_browser] done"
