package action

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
	"github.com/fieldwatch/fieldwatch/rules"
)

var screenshotDir = flag.String("screenshot-dir", "", "save notify-slack.png and notify-teams.png, the messages rendered by renderPage, to this directory")

// chromiumPath is Debian's Chromium (make testdeps), or $FIELDWATCH_CHROMIUM.
func chromiumPath() string {
	if p := os.Getenv("FIELDWATCH_CHROMIUM"); p != "" {
		return p
	}
	return "/usr/bin/chromium"
}

// renderPage is our own page that draws a Slack Block Kit message or a
// Teams Adaptive Card the way the services lay them out (a header, context
// lines, sections; text blocks, fact sets, containers, buttons), so that
// docs/notify.md can show what the JSON looks like. It is not Slack's nor
// Teams' renderer.
const renderPage = `<!DOCTYPE html><html><head><meta charset="utf-8"><style>
body{font-family:Lato,"Segoe UI",Helvetica,Arial,sans-serif;margin:16px;background:#fff;color:#1d1c1d;width:760px}
.msg{border-left:4px solid #ddd;padding:4px 12px}.h{font-size:18px;font-weight:900;margin:4px 0}
.ctx{color:#616061;font-size:12px;margin:4px 0}.sec{font-size:15px;margin:8px 0;line-height:1.45}
a{color:#1264a3;text-decoration:none}code{background:#f6f6f6;border:1px solid #ddd;border-radius:3px;padding:0 2px;font-size:12px}
.card{border:1px solid #e1dfdd;border-radius:4px;padding:12px 16px;box-shadow:0 1px 2px #0002}.tb{margin:4px 0;font-size:14px;line-height:1.4}
.bolder{font-weight:600}.medium{font-size:17px}.subtle{color:#605e5c}.sep{border-top:1px solid #e1dfdd;padding-top:8px;margin-top:8px}
table.facts td{padding:1px 12px 1px 0;font-size:14px}table.facts td:first-child{font-weight:600}
.btn{display:inline-block;border:1px solid #8a8886;border-radius:4px;padding:5px 14px;margin-top:10px;font-size:14px;color:#242424}
.who{font-weight:700;margin-bottom:4px}</style></head><body><div id="out"></div><script>
const msg = MESSAGE, kind = KIND;
const esc = s => s.replace(/&(?!amp;|lt;|gt;)/g,"&amp;").replace(/</g,"&lt;").replace(/>/g,"&gt;");
function mrkdwn(t){return t.replace(/<([^|>]+)\|([^>]+)>/g,'<a href="$1">$2</a>').replace(/\*([^*\n]+)\*/g,"<b>$1</b>").replace(/` + "`" + `([^` + "`" + `]+)` + "`" + `/g,"<code>$1</code>").replace(/\n/g,"<br>");}
function md(t){t=esc(t);return t.replace(/\*\*([^*]+)\*\*/g,"<b>$1</b>").replace(/\[([^\]]+)\]\(([^)]+)\)/g,'<a href="$2">$1</a>').replace(/^- /gm,"• ").replace(/\n/g,"<br>");}
function card(items){let h="";for(const it of items){const cls=(it.separator?" sep":"");
 if(it.type==="TextBlock")h+='<div class="tb'+(it.weight==="Bolder"?" bolder":"")+(it.size==="Medium"?" medium":"")+(it.isSubtle?" subtle":"")+cls+'">'+md(it.text)+"</div>";
 else if(it.type==="FactSet")h+='<table class="facts'+cls+'">'+it.facts.map(f=>"<tr><td>"+esc(f.title)+"</td><td>"+esc(f.value)+"</td></tr>").join("")+"</table>";
 else if(it.type==="Container")h+='<div class="'+cls+'">'+card(it.items)+"</div>";}return h;}
let h="";
if(kind==="slack"){h='<div class="who">fieldwatch <span class="ctx">APP</span></div><div class="msg">';
 for(const b of msg.blocks){if(b.type==="header")h+='<div class="h">'+esc(b.text.text)+"</div>";
  else if(b.type==="context")h+='<div class="ctx">'+b.elements.map(e=>mrkdwn(e.text)).join(" ")+"</div>";
  else if(b.type==="section")h+='<div class="sec">'+mrkdwn(b.text.text)+"</div>";}h+="</div>";}
else{const c=msg.attachments[0].content;h='<div class="who">fieldwatch (Workflows)</div><div class="card">'+card(c.body)+(c.actions||[]).map(a=>'<span class="btn">'+esc(a.title)+"</span>").join(" ")+"</div>";}
document.getElementById("out").innerHTML=h;document.title="rendered "+document.querySelectorAll(".sec,.tb").length;
</script></body></html>`

// sampleDigest is the digest of a small rollout as the docs show it:
// twelve Deployments of shop updated by alice, three listed.
func sampleDigest() *digest {
	r := &rules.Rule{Name: "shop-deployments"}
	var items []*item
	for i := range 12 {
		f := newFiring(r)
		f.Object.Kind, f.Object.Resource, f.Object.Namespace, f.Object.Name = "Deployment", "deployments", "shop", []string{"web", "cart", "checkout", "search"}[i%4]+fmt.Sprint(i/4+1)
		f.User = "alice"
		p := strings.Replace(string(f.Payload), `{"oldValue":1,"op":"replace","path":"/spec/size","value":2}`,
			`{"oldValue":"registry.example.com/shop:1.2","op":"replace","path":"/spec/template/spec/containers/0/image","value":"registry.example.com/shop:1.3"},{"oldValue":2,"op":"replace","path":"/spec/replicas","value":3}`, 1)
		f.Payload = []byte(p)
		items = append(items, &item{f: f})
	}
	return newDigest(items, 3, "prod-eu", "https://fieldwatch.example.com")
}

// TestRenderMessages renders the Slack and Teams messages of one group in
// headless Chromium with renderPage: every section and text block is
// drawn, and the screenshot is a picture of the page's size (saved for
// docs/notify.md with -screenshot-dir).
func TestRenderMessages(t *testing.T) {
	testenv.SkipShort(t, testenv.NeedsBrowser)
	if _, err := os.Stat(chromiumPath()); err != nil {
		t.Fatalf("no Chromium at %s (make testdeps installs Debian's chromium): %v", chromiumPath(), err)
	}
	slackJSON, err := json.Marshal(slackMessageOf(sampleDigest()))
	if err != nil {
		t.Fatal(err)
	}
	teamsJSON, err := teamsMessageOf(sampleDigest())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		kind  string
		body  []byte
		drawn int // sections (slack) or text blocks (teams)
	}{{"slack", slackJSON, 3}, {"teams", teamsJSON, 1 + 3*2 + 1}} {
		t.Run(tc.kind, func(t *testing.T) {
			dir := t.TempDir()
			page := strings.NewReplacer("MESSAGE", string(tc.body), "KIND", `"`+tc.kind+`"`).Replace(renderPage)
			file := filepath.Join(dir, "page.html")
			writeFile(t, file, page)
			args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
				"--disable-sync", "--no-first-run", "--user-data-dir=" + filepath.Join(dir, "profile"), "--window-size=800,560"}
			dom, err := exec.Command(chromiumPath(), append(args, "--dump-dom", "file://"+file)...).Output()
			if err != nil {
				t.Fatalf("chromium --dump-dom: %v", err)
			}
			if want := fmt.Sprintf("<title>rendered %d</title>", tc.drawn); !bytes.Contains(dom, []byte(want)) {
				t.Errorf("the page drew %s, want %s", firstTitle(dom), want)
			}
			if !bytes.Contains(dom, []byte("shop-deployments: 12 deployments in shop updated by alice")) || !bytes.Contains(dom, []byte("and 9 more")) {
				t.Errorf("the page lacks the summary or the more line:\n%s", dom)
			}
			shot := filepath.Join(dir, "shot.png")
			if out, err := exec.Command(chromiumPath(), append(args, "--screenshot="+shot, "file://"+file)...).CombinedOutput(); err != nil {
				t.Fatalf("chromium --screenshot: %v\n%s", err, out)
			}
			b, err := os.ReadFile(shot)
			if err != nil {
				t.Fatal(err)
			}
			img, err := png.Decode(bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			if s := img.Bounds().Size(); s.X != 800 || s.Y != 560 {
				t.Errorf("screenshot of %v, want 800x560", s)
			}
			if *screenshotDir != "" {
				if err := os.WriteFile(filepath.Join(*screenshotDir, "notify-"+tc.kind+".png"), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func firstTitle(dom []byte) string {
	_, after, _ := bytes.Cut(dom, []byte("<title>"))
	title, _, _ := bytes.Cut(after, []byte("</title>"))
	return string(title)
}
