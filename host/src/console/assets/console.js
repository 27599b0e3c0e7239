// outboxd console: live refresh of the pages that ask for it (<body data-refresh="SECONDS">).
// The pages work without it; it only reloads <main> in place, from the same URL.
(function () {
  var seconds = Number(document.body.getAttribute('data-refresh'));
  if (!seconds) return;
  setInterval(function () {
    if (document.hidden) return;
    fetch(window.location.href, { credentials: 'same-origin' })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (text) {
        if (!text) return;
        var next = new DOMParser().parseFromString(text, 'text/html');
        var main = next.getElementById('main');
        if (main) document.getElementById('main').replaceWith(main);
        if (!next.body.getAttribute('data-refresh')) document.body.setAttribute('data-refresh', '');
      })
      .catch(function () {});
  }, seconds * 1000);
})();
