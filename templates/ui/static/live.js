// Refreshes a live rollout's page without reloading it: long-polls the
// page's wait URL, then fetches the page and swaps its content in. The
// fetched HTML is parsed inertly (DOMParser runs no script) and comes from
// the same templates that escape every Flux text.
(function () {
  var wait = document.body.getAttribute("data-wait");
  if (!wait || !window.fetch || !window.DOMParser) return;
  var page = wait.replace(/\/wait$/, "");
  function swap() {
    return fetch(page, { credentials: "same-origin" }).then(function (r) {
      if (!r.ok) throw new Error(r.status);
      return r.text();
    }).then(function (html) {
      var doc = new DOMParser().parseFromString(html, "text/html");
      var next = doc.getElementById("main");
      if (next) document.getElementById("main").replaceWith(next);
      var w = doc.body.getAttribute("data-wait");
      if (!w) document.body.removeAttribute("data-wait");
      return !!w;
    });
  }
  function poll(delay) {
    setTimeout(function () {
      fetch(wait, { credentials: "same-origin" }).then(function (r) {
        if (!r.ok) throw new Error(r.status);
        return swap();
      }).then(function (live) {
        if (live) poll(0);
      }).catch(function () { poll(5000); });
    }, delay);
  }
  poll(0);
})();
