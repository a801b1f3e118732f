// Light JavaScript for the tracker pages: local times, the overview's
// self-refresh, and sign-in from a link's #fragment (never sent to a server).
"use strict";

function localTimes(root) {
  for (const el of root.querySelectorAll("time[datetime]")) {
    const at = new Date(el.getAttribute("datetime"));
    if (Number.isNaN(at.getTime())) continue;
    el.title = el.getAttribute("datetime");
    el.textContent = el.hasAttribute("data-hhmm")
      ? at.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })
      : at.toLocaleString();
  }
}

function refreshOverview() {
  const stamp = document.getElementById("refreshed");
  const owners = document.getElementById("owners");
  if (!stamp || !owners) return;
  const every = 1000 * Number(stamp.dataset.refresh || 5);
  const tick = async () => {
    try {
      const response = await fetch("/ui/owner-cards", { credentials: "same-origin" });
      if (response.redirected || response.status === 401) {
        window.location.reload();
        return;
      }
      if (response.ok) {
        owners.innerHTML = await response.text();
        const asOf = owners.querySelector("[data-as-of]");
        const clock = stamp.querySelector("time");
        if (asOf && clock) clock.setAttribute("datetime", asOf.dataset.asOf);
        localTimes(document);
        stamp.classList.remove("stale");
      } else {
        stamp.classList.add("stale");
      }
    } catch (err) {
      stamp.classList.add("stale");
    }
    setTimeout(tick, every);
  };
  setTimeout(tick, every);
}

function signInFromFragment() {
  const form = document.getElementById("signin");
  const token = window.location.hash.slice(1);
  if (!form || !token.startsWith("hsvc_")) return;
  history.replaceState(null, "", window.location.pathname + window.location.search);
  form.querySelector("input[name=credential]").value = decodeURIComponent(token);
  form.submit();
}

document.addEventListener("DOMContentLoaded", () => {
  localTimes(document);
  refreshOverview();
  signInFromFragment();
});
